"""torch -> ONNX: what MODEL names (source), the export and its checks (onnx_export), the FP16 report, the stage pipeline."""
