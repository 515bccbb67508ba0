"""Write the trained layers shipped in mha_viz/training/precomputed/ (or, with --check, retrain and compare).

    python scripts/precompute_trained_layers.py           train PRECOMPUTED_GRID, write the .npz files, print
                                                           the SHA256 table to paste into precomputed.py
    python scripts/precompute_trained_layers.py --check   retrain each and compare with the shipped file, byte for byte
                                                          (holds on the AVX2 CPU kind that built them; AVX-512
                                                          kernels round differently)

train() is deterministic for its arguments (one torch thread, seeded data and weights), so the files
are reproducible on the same torch build and CPU.
"""

from __future__ import annotations

import argparse
import hashlib
import sys

from mha_viz.training.precomputed import FOLDER, PRECOMPUTED_GRID, SHA256, file_name, layer_to_npz
from mha_viz.training.trainer import train


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="retrain and compare with the shipped files")
    args = parser.parse_args()
    FOLDER.mkdir(exist_ok=True)
    table, failures = {}, 0
    for task, h, d_model, seed, steps in PRECOMPUTED_GRID:
        name = file_name(task, h, d_model, seed, steps)
        data = layer_to_npz(train(task, h, d_model, steps, seed).layer)
        digest = hashlib.sha256(data).hexdigest()
        table[name] = digest
        if args.check:
            same = digest == SHA256.get(name) and (FOLDER / name).read_bytes() == data
            failures += not same
            print(f"{'same' if same else 'DIFFERENT'}  {name}  {digest}")
        else:
            (FOLDER / name).write_bytes(data)
            print(f"wrote {name} ({len(data) / 1e3:.0f} kB)  {digest}")
    if not args.check:
        print("SHA256 = {\n" + "".join(f'    "{n}": "{d}",\n' for n, d in table.items()) + "}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
