#!/usr/bin/env python3
"""torchrun, working on Debian 12 (PyTorch 1.13 on Python 3.11).

Debian 12's /usr/bin/torchrun stops at start with "AttributeError: 'NoneType' object has no
attribute 'get'": torch 1.13 finds its redirect setting Std.NONE (value 0) by iterating the
IntFlag Std, and Python 3.11 no longer yields a flag's zero member when iterating. This runs
torch.distributed.run with that one lookup fixed; every argument is torchrun's:

    /usr/bin/python3 tools/torchrun.py --nproc_per_node 4 examples/pytorch_ddp_fmnist.py
"""
import re
import sys

from torch.distributed.elastic.multiprocessing import api


def _from_str(vm):
    if re.fullmatch(r"[0-3]", vm):
        return api.Std(int(vm))
    return {int(rank): api.Std(int(value)) for rank, value in (item.split(":") for item in vm.split(","))}


api.Std.from_str = staticmethod(_from_str)

from torch.distributed.run import main  # noqa: E402  (after the fix)

if __name__ == "__main__":
    sys.exit(main())
