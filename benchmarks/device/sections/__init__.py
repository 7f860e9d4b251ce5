"""The device check's sections, in the order they run: ``profile``, ``reference``, ``modes``, ``fused``, ``epoch``,
``memory``, ``step``, ``shapes``, ``determinism``, ``oom``, ``calibrate``. Each is a module with ``NAME``,
``run(check, args)`` (its figures) and ``summary(figures)`` (its lines of the summary), and ``NEEDS_CUDA`` (why) where
a CPU cannot run it; its docstring says what it measures."""

from __future__ import annotations

from . import calibrate, determinism, epoch, fused, memory, modes, oom, profile, reference, shapes, step

SECTIONS = {section.NAME: section for section in (profile, reference, modes, fused, epoch, memory, step, shapes,
                                                  determinism, oom, calibrate)}
