"""Everything that reads predictions, beside the model and not inside it: the two DetEvals (deteval.py on polygons,
deteval_rect.py the competition's on rectangles), scoring a predictions file against ground truth (scoring.py,
`east-cache evaluate`), the review page (review.py, `east-cache review`). Imported by the model side and the
command line only; it imports nothing of training and no torch. docs/architecture.md maps every module."""
