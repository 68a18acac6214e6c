"""pipecheck: is your PyTorch input pipeline holding training back, why, and what to change."""
