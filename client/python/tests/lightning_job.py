"""A tiny Lightning training run over `CogfeedDataModule`, for tests/test_lightning.py (run as
a script, so that strategy "ddp" can start its other ranks the same way): every training
sample it trains on is written, by rank, to OUT/seen-rank<r>.jsonl as it goes.

    lightning_job.py ADDRESS OUT DEVICES EPOCHS [--kill-at-batch K] [--ckpt-every N] [--resume CKPT]
"""

import argparse
import json
import os
import signal

import torch

from cogfeed.lightning import CogfeedDataModule, pl

#: The stream every run trains on (the tests compare against cogfeed.Loader with these).
STREAM = dict(dataset="demo-series", layers=["s2"], patch_size=16, batch_size=4, samples_per_epoch=32, seed=7,
)


class Tiny(pl.LightningModule):
    def __init__(self, out):
        super().__init__()
        self.out = out
        self.conv = torch.nn.Conv2d(4, 1, 3)

    def training_step(self, batch, batch_idx):
        image = batch["layers"]["s2"][:, -1].float()  # the latest date, [B, 4, H, W]
        loss = self.conv(image / 10000.0).pow(2).mean()
        with open(os.path.join(self.out, f"seen-rank{self.global_rank}.jsonl"), "a") as f:
            for m in batch["meta"]:
                f.write(json.dumps({"epoch": int(batch["epoch"]), "drawn": m.drawn, "bounds": list(m.bounds),
                                    "split": m.split, "step": int(self.global_step)}) + "\n")
        return loss

    def validation_step(self, batch, batch_idx):
        with open(os.path.join(self.out, f"val-rank{self.global_rank}.jsonl"), "a") as f:
            for m in batch["meta"]:
                f.write(json.dumps({"split": m.split, "epoch": int(self.current_epoch)}) + "\n")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class KillAt(pl.Callback):
    """SIGKILL (as a crash) when batch K of the first epoch is about to be trained on."""

    def __init__(self, k):
        self.k = k

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == self.k:
            os.kill(os.getpid(), signal.SIGKILL)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("address")
    p.add_argument("out")
    p.add_argument("devices", type=int)
    p.add_argument("epochs", type=int)
    p.add_argument("--kill-at-batch", type=int)
    p.add_argument("--ckpt-every", type=int)
    p.add_argument("--resume")
    a = p.parse_args()
    args = dict(STREAM)
    dm = CogfeedDataModule(a.address, args.pop("dataset"), train="train", val="val",
                           eval_args={"samples_per_epoch": 8}, **args)
    callbacks = []
    if a.ckpt_every:
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=os.path.join(a.out, "ckpt"), save_top_k=-1,
                                                      every_n_train_steps=a.ckpt_every, filename="{step}"))
    if a.kill_at_batch is not None:
        callbacks.append(KillAt(a.kill_at_batch))
    trainer = pl.Trainer(accelerator="cpu", devices=a.devices, strategy="ddp" if a.devices > 1 else "auto",
                         max_epochs=a.epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, callbacks=callbacks, enable_checkpointing=bool(callbacks))
    trainer.fit(Tiny(a.out), datamodule=dm, ckpt_path=a.resume)


if __name__ == "__main__":
    main()
