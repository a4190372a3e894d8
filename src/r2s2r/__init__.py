"""r2s2r: turn a robot task into a learned, reusable simulator."""

import os

# Everything r2s2r loads is local: datasets from a root folder, models from a checkpoint directory.
# LeRobot and huggingface_hub otherwise try the Hub for anything they cannot find, which on an offline
# machine means long timeouts instead of a clear "file not found".
os.environ.setdefault("HF_HUB_OFFLINE", "1")

__version__ = "0.2.0"
