"""The artifact's description: the manifest (manifest.py: file names, the typed Manifest, its migrations) and the
typed records it holds (records.py: the stage reports; model_source.py: where the model came from; io_signature.py;
precision.py). What convert writes and every later stage reads."""
