"""Exit 0 when the app on PORT (default 8501) answers /_stcore/health, else 1 (the Dockerfile's HEALTHCHECK)."""

import os
import sys
import urllib.request

try:
    with urllib.request.urlopen(f"http://127.0.0.1:{os.environ.get('PORT', '8501')}/_stcore/health", timeout=5) as r:
        sys.exit(0 if r.status == 200 else 1)
except OSError:
    sys.exit(1)
