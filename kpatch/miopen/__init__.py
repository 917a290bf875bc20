"""miopen: what kpatch must know about MIOpen and the machine it runs on.

* :mod:`.paths` -- where MIOpen looks for its user kernel DB (the same rule
  as MIOpen's), and which directories kpatch refuses to write.
* :mod:`.device` -- the mode (override / native) and CU count, from sysfs
  and the environment.
"""
