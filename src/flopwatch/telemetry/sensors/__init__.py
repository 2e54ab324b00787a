"""Sensor backends: the protocol and clocks in ``base.py``, one file per vendor (vendor libraries imported lazily
inside each backend), discovery in ``discover.py``. The row types are :mod:`flopwatch.telemetry.schema`'s."""
