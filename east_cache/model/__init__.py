"""The model side: EAST (model.py) and its loss; training, read top to bottom in train.py (the command and the run)
and engine.py (the step and the epoch); checkpoints, validation, decoding of maps to quads and prediction
(east-predict). Scoring, review and DetEval live in east_cache/evaluate/. docs/architecture.md maps every
module."""
