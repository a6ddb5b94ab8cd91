"""Long videos: the window plan and the runner that answers a video window by window."""
