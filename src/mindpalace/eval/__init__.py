"""Evaluations on real data: LoCoMo evidence recall, the Recuris span experiment."""
