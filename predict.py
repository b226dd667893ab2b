"""Predict words on full images with a trained checkpoint and write a UFO JSON submission file:
`python predict.py --checkpoint runs/east/latest.pt --data ROOT --split test --out predictions.json`
(or `--images DIR` for a plain folder). The code is east_cache.predict.predict (`east-predict` once installed)."""
import sys

from east_cache.predict.predict import main

if __name__ == "__main__":
    sys.exit(main())
