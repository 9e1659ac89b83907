"""Ordering Arrow rows, and sorting more of them than memory holds (sorted runs on local disk).

Shared by the index build and the orphan scan, and importing neither.
"""
