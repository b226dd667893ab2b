"""What predicts with EAST: east-predict (predict.py: full images -> quads in each image's frame -> a UFO file), the
images it reads and their inputs (pages.py), several checkpoints and test-time scales in one prediction (fusion.py),
a checkpoint read back for inference (weights.py) and the device it runs on (device.py). Imports the model, never
the training loop (east_cache/train/, which uses this room to validate on full pages)."""
