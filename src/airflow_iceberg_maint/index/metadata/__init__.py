"""Index metadata: the format's numbers (``spec``), the index expressions (``expressions``), the model and
its JSON (``model``, ``fields``), the rules that make a file valid (``rules``), the builders of new
indexes and extracts (``builders``), and where metadata files live and how they are committed
(``store``)."""
