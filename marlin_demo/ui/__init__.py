"""The Gradio UI: one module per tab (``render()`` lays it out, ``listen()`` wires its events);
``blocks.build_demo(engine, settings)`` assembles them."""

from marlin_demo.ui.blocks import build_demo

__all__ = ["build_demo"]
