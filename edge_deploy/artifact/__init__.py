"""The artifact's description: the manifest (manifest.py: file names, the typed Manifest, its migrations) and the
typed records it holds (records.py: the stage reports; io_signature.py; precision.py). What convert writes and every
later stage reads. The "source" section's type is the families' own (lanedet/model_source.py), as the decode and
preprocess sections' are."""
