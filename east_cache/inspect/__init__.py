"""Looking at a cache through the reader: the commands `bench` (reading speed: DataLoader settings against memcpy,
train.py's loader beside an own loop, what an augmentation recipe costs a worker) and `show` (a sample drawn: as a
cache holds it, over several epochs, or made from its source); the drawing itself is torch-free (draw.py)."""
