"""Marlin-2B Gradio demo: video captioning and temporal grounding."""
