"""The example's settings, Kale style: ALL_CAPS names, chosen by KALE_SETTINGS_MODULE.

The broker comes from the environment (LANNER_BROKER), as Kale's SQS credentials may.
"""

# Kale's SQS settings: lanner ignores them (with one warning) and reads LANNER_BROKER.
AWS_ACCESS_KEY_ID = "x"
AWS_SECRET_ACCESS_KEY = "x"
AWS_REGION = "us-west-2"

# Queue config file path, relative to the working directory (as Kale reads it).
QUEUE_CONFIG = "taskworker/queue_config.yaml"

# SQS limits per message size, bytes.
SQS_TASK_SIZE_LIMIT = 256000

# The class for queue selection.
QUEUE_SELECTOR = "kale.queue_selector.ReducedLottery"
