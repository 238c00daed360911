"""When the CLI started: the build's stage breakdown counts the imports too, so this is imported first."""

import time

T0 = time.perf_counter()
