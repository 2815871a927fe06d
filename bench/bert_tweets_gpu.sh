#!/usr/bin/env bash
# MiniLM (the embedded 6-layer BERT) on the embedded tweets on one GPU: a dense fine-tune, then EW, VW (V=16),
# TW (G=64, 128) and TEW (G=128) pruned from it to 50% and 75% in two stages of one epoch each.
# Writes bench/results/bert_tweets.{json,md}. Run from the repository root: bash bench/bert_tweets_gpu.sh
# MODEL_DIR / TWEETS_CSV point at a copy of the checkpoint and corpus where the packages are not installed.
set -euo pipefail
runs=logs/bert_tweets
model=${MODEL_DIR:-embedded-minilm}
csv=${TWEETS_CSV:-null}
common="experiment=bert_tweets model.pretrained=$model data.csv_path=$csv logger=csv ~callbacks.progress_bar
  trainer.enable_progress_bar=false importance.num_batches=16"
python train.py $common schedule.stages=0 schedule.dense_epochs=2 hydra.run.dir=$runs/dense
dense=$runs/dense/checkpoints/last.ckpt
labels=("dense=$runs/dense/summary.json")
for target in 0.5 0.75; do
  for variant in "ew:pattern=ew" "vw:pattern=vw" "tw64:pattern=tw pattern.granularity=64" \
                 "tw128:pattern=tw pattern.granularity=128" "tew128:pattern=tew pattern.granularity=128"; do
    name=${variant%%:*}; overrides=${variant#*:}
    python train.py $common $overrides init_ckpt=$dense schedule.target=$target schedule.dense_epochs=0 \
      schedule.stages=2 schedule.finetune_epochs=1 hydra.run.dir=$runs/$name-$target
    labels+=("$name-$target=$runs/$name-$target/summary.json")
  done
done
python bench/collect_runs.py --out bench/results/bert_tweets --command "bash bench/bert_tweets_gpu.sh" \
  --device "$(python -c 'import torch; print(torch.cuda.get_device_name())')" "${labels[@]}"
