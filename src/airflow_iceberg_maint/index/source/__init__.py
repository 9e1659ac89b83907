"""Reading the indexed table's files: a snapshot's data and delete files (``snapshot_files``), rows with
their true positions (``live_rows``), Parquet files kept open (``parquet_files``) and read page by page
(``page_reads``, ``dictionary_pages``)."""
