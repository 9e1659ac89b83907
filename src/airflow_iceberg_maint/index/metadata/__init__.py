"""Index metadata: the spec's numbers (``spec``), the model and its JSON (``model``), the rules that
make a file valid (``rules``), and the builders of new indexes and extracts (``builders``)."""
