"""What an orphan scan lists: the candidates under a location, held as columns within a memory budget.

``candidates`` lists storage in chunks (or an inventory does: ``inventory``, reading S3 Inventory
reports with ``s3_inventory``, S17), keeping the files older than the cutoff as ``listed_rows``:
hashes in sorted runs, rows as Arrow batches that ``spilled_batches`` moves to local disk past their
share of the budget (the orphans a scan finds are held the same way).
"""
