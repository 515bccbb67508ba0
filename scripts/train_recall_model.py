"""Train a bundled long-context model, mha-viz/recall-16k or mha-viz/hybrid-2l, from scratch, bit for bit.

    python scripts/train_recall_model.py             retrain recall-16k into mha_viz/models/recall-16k
    python scripts/train_recall_model.py --model mha-viz/hybrid-2l
                                                     retrain the hybrid (Gated DeltaNet + attention) into its folder
    python scripts/train_recall_model.py --out DIR   into another folder
    python scripts/train_recall_model.py --check     retrain into a temporary folder and compare every file it
                                                     writes with the bundled one (exit 1 if any differs)

The recipe is mha_viz.training.recall.RECIPES[model] (recorded in the folder's recipe.json). Bit-for-bit equality needs the
same torch build (requirements.txt) on a CPU with the same instruction set. Then it measures recall at 512 to
16,384 tokens (mha_viz.training.recall.recall_accuracy), the figures of the model's README.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's mha_viz, even if another is installed

from mha_viz.pretrained import load_model
from mha_viz.pretrained.loading import SHIPPED_MODELS, WEIGHTS_FILE, file_sha256, shipped_model_dir
from mha_viz.training.recall import GENERATED_FILES, RECIPES, recall_accuracy, save, train


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(RECIPES), default="mha-viz/recall-16k", help="which model")
    parser.add_argument("--out", type=Path, help="folder to write (default: the bundled model's folder)")
    parser.add_argument("--check", action="store_true", help="retrain and compare with the bundled model")
    args = parser.parse_args()
    recipe = RECIPES[args.model]
    total = sum(steps for steps, _, _ in recipe.stages())
    start = time.perf_counter()

    def progress(step: int, loss: float) -> None:
        if step % 100 == 0 or step == total:
            print(f"step {step}/{total}  loss {loss:.4f}  {time.perf_counter() - start:.0f} s", flush=True)

    model = train(recipe, on_step=progress)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) if args.check else (args.out or shipped_model_dir(args.model))
        save(model, recipe, folder)
        sha256 = file_sha256(folder / WEIGHTS_FILE)
        print(f"{folder / WEIGHTS_FILE}: sha256 {sha256}")
        loaded = load_model(folder)
        for length in (512, 2048, 16384):
            print(f"recall at {length} tokens: {recall_accuracy(loaded, length):.3f}", flush=True)
        if not args.check:
            known = SHIPPED_MODELS.get(args.model, ("none recorded",))[0]
            if sha256 != known:
                print(f"note: differs from the sha256 in mha_viz/pretrained/loading.py: {known}")
            return 0
        bundled = shipped_model_dir(args.model)
        different = [name for name in GENERATED_FILES if (folder / name).read_bytes() != (bundled / name).read_bytes()]
        for name in GENERATED_FILES:
            print(f"  {name}: {'DIFFERS' if name in different else 'identical'}")
        print("bit-for-bit equal to the bundled model" if not different else "NOT equal to the bundled model")
        return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
