"""One table's orphan scan spread over several tasks (``scan``): plan, scan shards, match buckets, finish.

``files`` is the scratch space the steps exchange through, ``plan`` the plan and the markers,
``match`` the third step and ``finish`` the last, which settles as the single-task run does.
"""
