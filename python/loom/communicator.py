# SPDX-License-Identifier: Apache-2.0
"""loom.Communicator: a collective plugin's allreduce, broadcast and barrier on torch tensors."""
from . import _native
from ._options import options_text


class Communicator:
    """The processes of a job (`loom launch`, torchrun's environment, or
    mpirun) joined by a collective plugin ("ucx", "mpi", ...).

        comm = loom.Communicator(name="ucx")
        comm.allreduce(t)            # in place: the sum over the ranks
        comm.broadcast(t, root=0)
        comm.barrier()

    Tensors must be contiguous CPU tensors; every call waits at most
    `timeout` seconds. Keywords other than these are the plugin's options.
    """

    def __init__(self, name="ucx", *, plugin_path=None, timeout=300.0, **options):
        text = options_text(options)
        self._comm = _native.Communicator(name=name, options=text, plugin_path=[str(p) for p in (plugin_path or [])],
                                          timeout=float(timeout))

    @property
    def rank(self):
        return self._comm.rank

    @property
    def size(self):
        return self._comm.size

    def allreduce(self, tensor, op="sum"):
        """Reduces tensor in place over every rank (op: sum, prod, min, max, avg); returns it."""
        self._comm.allreduce(tensor, op)
        return tensor

    def broadcast(self, tensor, root=0):
        """Overwrites tensor with root's, in place; returns it."""
        self._comm.broadcast(tensor, root)
        return tensor

    def barrier(self):
        self._comm.barrier()
