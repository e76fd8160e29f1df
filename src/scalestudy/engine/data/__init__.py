"""Data pipeline: numpy + `tokenizers` only (no torch; the engine turns arrays into tensors).

corpora.py (readers), mixing.py (temperature sampling), tokenizer.py (train/load, T5 special ids),
span_corruption.py (T5 objective), knowledge.py (ERNIE-style masking), packing.py, bundled.py (KJV excerpt, lexicon),
pipeline.py (DataConfig, prepare, Prepared, BatchStream: the engine's entry points).
"""
