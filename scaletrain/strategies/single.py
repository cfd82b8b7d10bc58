"""`single`: one process, one device — the baseline every other number is compared to."""

from .base import Strategy


class SingleStrategy(Strategy):
    name = "single"
    help = "one process on one device; the baseline"
    multi_process = False
    fill = None
    baseline = True
