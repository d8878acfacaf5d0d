"""Training and export: cross-encoder fine-tuning, feature weights, calibration."""
