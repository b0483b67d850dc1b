"""The floor every stage stands on, and the client too: the one way files are read (bounded_read) and written
(fsutil), numbers checked (numbers), JSON records (json_record, strict_json), progress lines, sizes, tables, the
state directory and Triton's rules for a model repository (triton_layout). Imports nothing above it."""
