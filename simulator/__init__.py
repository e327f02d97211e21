"""The ctxrecover fault-injection simulator: mock providers, proxy middleboxes, transcript replay."""
