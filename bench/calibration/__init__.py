"""The decision rules' error rates at the shipped defaults, apart from the harness's speed.

- :mod:`bench.calibration.power`: ``harness compare``'s false alarms and detection power
  (``power.json``, ``power-early-stop.json``, ``power-recorded.json``); its tables in the
  documentation are written by :mod:`bench.calibration.power_table`;
- :mod:`bench.calibration.logprobs`: the numerics rule's (``logprobs.json``);
- :mod:`bench.calibration.plugin_aa`: the pytest plugin's false alarms (``plugin_aa.json``).

``make calibrate`` runs them; ``make bench`` measures speed and scale only (:mod:`bench.run`).
"""
