"""Reading through an index: point lookups (``lookup``), many keys or a range (``query``), the region
files a read touches (``regions``, ``region_reads``), and key probes with the plain scan they fall
back on (``key_scan``)."""
