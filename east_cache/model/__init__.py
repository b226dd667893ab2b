"""The model side: EAST (model.py) and its loss; training, read top to bottom in train.py (the command and the run)
and engine.py (the step and the epoch); checkpoints, validation, decoding of maps to quads, DetEval, prediction
(east-predict), scoring (east-cache evaluate) and the review page (east-cache review). docs/architecture.md maps
every module."""
