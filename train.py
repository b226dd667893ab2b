"""Train EAST (Zhou et al., CVPR 2017) on a cache built by `python -m preprocess build`.

The cache holds ready uint8 crops and float16 targets, so a training step is: copy a batch to the
device, colour-jitter and normalise it there, run the model under autocast, and compute the loss in
float32. Single process: `python train.py --cache cache`; several GPUs:
`torchrun --nproc_per_node=N train.py --cache cache` (--batch-size is per process).

With --val-cache, every --eval-every epochs the model's maps for the validation crops are decoded into quads
(east_cache.model.decode) and scored against the words stored in that cache with DetEval (east_cache.evaluate.deteval):
precision, recall and hmean go into the epoch's line of OUT/log.jsonl and its printed summary.
`python train.py --eval-only --checkpoint CKPT --val-cache DIR` does that for one checkpoint, appending to
OUT/eval.jsonl; `python train.py --export-onnx model.onnx --checkpoint CKPT` writes the model for ONNX
runtimes (needs `pip install -e ".[export]"`).

This file is the script; the code is the `east_cache.train` package (east_cache.train.train holds the command and
the run, `east-train` once installed), the model it trains `east_cache.model`.
"""
from east_cache.train.train import entry

if __name__ == "__main__":
    entry()
