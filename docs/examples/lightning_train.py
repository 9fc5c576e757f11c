"""Train with Lightning on the time-series demo's spatial splits (`demo-series`, train and val
cells of `[datasets.split]`) through `cogfeed.lightning.CogfeedDataModule`, checkpointing
mid-epoch; `--resume CKPT` continues from such a checkpoint after the last batch it trained on.

    python docs/examples/lightning_train.py [ADDRESS] [--resume CKPT] [--out DIR]
    # ADDRESS or COGFEED_SERVER; default 127.0.0.1:50051

Needs `pip install 'cogfeed[lightning]'` and a daemon serving the demos (`cogfeed serve`).
One short epoch (8 steps of 4 samples) on a CPU: seconds. For DDP give the Trainer
`strategy="ddp", devices=N`: each rank streams its own share.
"""

import argparse
import os
import tempfile

import torch

from cogfeed.lightning import CogfeedDataModule, pl


class Segmenter(pl.LightningModule):
    """A per-pixel classifier of the latest Sentinel-2 date (4 bands) into the label classes."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Conv2d(4, 16, 3, padding=1), torch.nn.ReLU(),
                                       torch.nn.Conv2d(16, 10, 1))

    def _loss(self, batch):
        image = batch["layers"]["s2"][:, -1].float() / 10000.0  # [B, T, 4, H, W]: the latest date
        label = batch["layers"]["label"][:, 0].long()  # [B, H, W], 255 = nodata
        return torch.nn.functional.cross_entropy(self.net(image), label, ignore_index=255)

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("train_loss", loss, batch_size=len(batch["meta"]))
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch), batch_size=len(batch["meta"]))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("address", nargs="?", default=os.environ.get("COGFEED_SERVER", "127.0.0.1:50051"))
    p.add_argument("--resume", help="a checkpoint to continue from")
    p.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "cogfeed-lightning-example"))
    a = p.parse_args()
    data = CogfeedDataModule(a.address, "demo-series", train="train", val="val", layers=["s2", "label"],
                             patch_size=32, batch_size=4, samples_per_epoch=32, seed=0,
                             eval_args={"samples_per_epoch": 8})
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=a.out, every_n_train_steps=3, save_top_k=-1,
                                               filename="{epoch}-{step}")
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, callbacks=[checkpoints])
    trainer.fit(Segmenter(), datamodule=data, ckpt_path=a.resume)
    print(f"trained {trainer.global_step} steps; val_loss {trainer.callback_metrics['val_loss'].item():.3f}; "
          f"data state {data.state_dict()}; checkpoints in {a.out}: {sorted(os.listdir(a.out))}")


if __name__ == "__main__":
    main()
