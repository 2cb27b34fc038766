"""Placing a recording on W workers and counting the bytes that move (part of :mod:`benchmarks.traffic`).

:func:`simulate` places tasks the way a balanced ``distributed`` cluster would (input blocks as
:data:`PLACEMENTS` says, every other task where most of its dependencies' bytes are) and returns
one :class:`StepTraffic` per step.
"""

from __future__ import annotations

from dataclasses import dataclass

from .traffic_record import Step, sort_key


@dataclass
class StepTraffic:
    """Bytes of one step on W workers.

    Attributes
    ----------
    between_workers : int
        Results sent from one worker to another.
    crossings : dict
        kind → (number of (key, destination) transfers, bytes).
    client_data : int
        Data keys the client put into the graph (the zarr handle, shared arrays such as Ω),
        each sent once to each worker that runs a task needing it.
    task_specs : int
        Pickled tasks the scheduler sends to the workers (literal arguments included; not the
        data keys they depend on).
    to_client : int
        Results gathered by the client (0 for ``persist``).
    read_per_worker : int
        Largest in-memory size of the input blocks one worker reads (``sizeof``).
    received_max : int
        Most bytes one worker receives: results of other workers and the data keys it needs
        (the network's busiest link).
    largest_task : int
        Largest sum of a task's inputs (data keys included) and result (a lower bound of its
        memory: temporaries such as the float64 copy of a block are not in the graph).
    """

    call: str
    signature: str
    between_workers: int
    crossings: dict
    client_data: int
    task_specs: int
    to_client: int
    read_per_worker: int
    received_max: int
    largest_task: int


#: Where the input blocks are read: in contiguous ranges (block i of m on worker ⌊i·W/m⌋, as
#: on a balanced cluster that holds its data) or round-robin (block i on worker i mod W: how
#: ``distributed``'s task queuing hands out reads of data that no worker holds, e.g. zarr on an
#: object store, one free thread at a time in priority order — sibling blocks on different
#: workers).
PLACEMENTS = ("contiguous", "round-robin")


def simulate(steps: list[Step], n_workers: int, placement: str = "contiguous") -> list[StepTraffic]:
    """Place every task of ``steps`` on ``n_workers`` workers and count the bytes that move.

    Input blocks (the step's root tasks, grouped by key name) go to workers as ``placement``
    says (see :data:`PLACEMENTS`). Every other task, in order of depth, goes to the worker
    holding the most bytes of its dependencies (ties: fewest tasks so far, then lowest index).
    Persisted results keep their worker across steps.
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement={placement!r}: expected one of {PLACEMENTS}")
    location: dict = {}
    report = []
    for step in steps:
        load = [0] * n_workers
        roots = step.roots()
        root_keys = {t.key for t in roots}
        read = [0] * n_workers
        groups: dict = {}
        for task in roots:
            groups.setdefault(sort_key(task.key)[0], []).append(task)
        for group in groups.values():
            group.sort(key=lambda t: sort_key(t.key)[1])
            for i, task in enumerate(group):
                location[task.key] = i * n_workers // len(group) if placement == "contiguous" else i % n_workers
                read[location[task.key]] += task.sizeof_bytes
        size = {key: t.out_bytes for key, t in step.resident.items()}
        size.update({key: t.out_bytes for key, t in step.tasks.items()})
        moved, shipped = set(), set()
        for key in step.placement_order():
            task = step.tasks[key]
            if key in root_keys:
                worker = location[key]
            else:
                held: dict = {}
                for dep in task.deps:
                    if dep not in step.client_data:
                        held[location[dep]] = held.get(location[dep], 0) + size[dep]
                most = max(held.values(), default=0)
                candidates = [w for w, b in held.items() if b == most] or range(n_workers)
                worker = min(candidates, key=lambda w: (load[w], w))
                location[key] = worker
            load[worker] += 1
            for dep in task.deps:
                if dep in step.client_data:
                    shipped.add((dep, worker))
                elif location[dep] != worker:
                    moved.add((dep, worker))
        received = [0] * n_workers
        for dep, worker in moved:
            received[worker] += size[dep]
        for dep, worker in shipped:
            received[worker] += step.client_data[dep]
        crossings: dict = {}
        for dep, _ in moved:
            kind = (step.tasks.get(dep) or step.resident[dep]).kind
            count, total = crossings.get(kind, (0, 0))
            crossings[kind] = (count + 1, total + size[dep])
        report.append(StepTraffic(
            call=step.call,
            signature=step.signature(),
            between_workers=sum(size[dep] for dep, _ in moved),
            crossings=crossings,
            client_data=sum(step.client_data[dep] for dep, _ in shipped),
            task_specs=sum(t.spec_bytes for t in step.tasks.values()),
            to_client=0 if step.call == "persist" else sum(size.get(k, 0) for k in step.outputs),
            read_per_worker=max(read),
            received_max=max(received),
            largest_task=max(t.out_bytes + sum(size.get(dep, step.client_data.get(dep, 0)) for dep in t.deps)
                             for t in step.tasks.values()),
        ))
    return report
