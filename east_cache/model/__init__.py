"""EAST itself: the network (model.py: VGG16-BN, its input, its backbone weights), its loss (loss.py) and the
decoding of its maps into quads (decode.py). What trains it is east_cache/train/, what predicts with it
east_cache/predict/; scoring, review and DetEval live in east_cache/evaluate/. docs/architecture.md maps every
module."""
