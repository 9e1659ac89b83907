"""The data files of an extract: region and tracking files (``extract_files``) and the index order of
their keys (``ordering``)."""
