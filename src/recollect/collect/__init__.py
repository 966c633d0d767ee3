"""Collecting experience: what writes into a buffer while an agent acts.

``observers`` (:class:`~recollect.Observer`, called once per environment step) and ``drivers``
(stepping a Gymnasium vector env into observers). Imports no framework; the public paths
``recollect.observers`` and ``recollect.drivers`` are aliases of these modules (see
:mod:`recollect`).
"""
