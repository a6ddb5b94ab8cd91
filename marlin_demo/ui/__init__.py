"""The Gradio UI, a module per tab; importing it imports nothing, so Gradio's stub rewrite can be skipped."""
