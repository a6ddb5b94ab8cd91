"""The Gradio UI: one module per tab (``render()`` lays it out, ``listen()`` wires its events);
``blocks.build_demo(engine, settings)`` assembles them. Importing this package imports nothing, so
``gradio_hooks.skip_stub_rewrite`` can run before Gradio is imported."""
