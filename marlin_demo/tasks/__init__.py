"""The registry of tasks (``registry``) and the two the model was trained on, each with its answer type
(``caption``, ``find``): importing a task's module registers it, placed by its entry's ``order``."""

from marlin_demo.tasks.caption import CAPTION
from marlin_demo.tasks.find import FIND
from marlin_demo.tasks.registry import TASKS, Task, get_task, known, register_task, unregister_task

__all__ = ["CAPTION", "FIND", "TASKS", "Task", "get_task", "known", "register_task", "unregister_task"]
