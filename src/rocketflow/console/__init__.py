"""``rocketflow console``: a web console for any RocketMQ 4.x cluster, like RocketMQ Dashboard.

```python
from rocketflow.console import ConsoleSettings, ConsoleThread

with ConsoleThread(ConsoleSettings("127.0.0.1:9876", port=0)) as console:
    print("open", console.url)
```

Needs the ``console`` extra (``pip install 'rocketflow[console]'``). See docs/console.md.
"""

from rocketflow.console.app import create_app
from rocketflow.console.server import ConsoleThread, console_url, exposed_warning, run_console
from rocketflow.console.settings import ConsoleSettings

__all__ = ["ConsoleSettings", "ConsoleThread", "console_url", "create_app", "exposed_warning", "run_console"]
