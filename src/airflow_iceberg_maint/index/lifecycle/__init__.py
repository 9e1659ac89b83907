"""An index over time: how far it lags its table (``lag``), the files it keeps alive (``references``),
and the expiry of old extracts (``expire``)."""
