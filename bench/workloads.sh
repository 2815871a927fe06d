# Sourced by the GPU bench scripts: each workload's training arguments and its dense reference.
# After `use_workload NAME`: dense (the dense run's overrides), sweep (its sweep file), text (data/model
# overrides every pruned run needs), schedule (the pruning schedule the sweep uses), metric, scale (points per
# metric unit) and timed_export (1: export and time every point). Needs runs (the runs directory) and extra.
common=(logger=csv "~callbacks.progress_bar" trainer.enable_progress_bar=false
  callbacks.model_checkpoint.save_top_k=1)  # one checkpoint per run: 15 VGG16 runs would otherwise keep ~30 GB

use_workload() {
  workload=$1 text=() schedule=() timed_export=0 scale=100 metric=test/acc
  case $workload in
    vgg16)
      dense=(experiment=vgg16_fmnist_dense)
      sweep=conf/sweep/vgg16_fmnist.yaml
      timed_export=1 ;;
    bert)
      text=(model.pretrained="${MODEL_DIR:-embedded-minilm}" data.csv_path="${TWEETS_CSV:-null}" importance.num_batches=16)
      dense=(experiment=bert_tweets "${text[@]}" schedule.dense_epochs=2)
      sweep=conf/sweep/bert_patterns.yaml
      schedule=(schedule.stages=2 schedule.finetune_epochs=1) ;;
    lstm_nmt)
      dense=(experiment=lstm_nmt_bible)
      sweep=conf/sweep/lstm_nmt_patterns.yaml
      schedule=(schedule.finetune_epochs=2)
      metric=test/bleu scale=1 ;;
    *) echo "unknown workload $workload (vgg16, bert or lstm_nmt)" >&2; return 2 ;;
  esac
  dense_dir=$runs/${workload}_dense${TAG:+_$TAG}  # a tagged run (another seed) trains its own
}

# Trains the workload's dense reference into $dense_dir unless it is already there.
train_dense() {
  [[ -f $dense_dir/summary.json ]] && return
  python train.py "${dense[@]}" schedule.stages=0 "${common[@]}" "${extra[@]}" hydra.run.dir="$dense_dir"
}

gpu_name() { python -c 'import torch; print(torch.cuda.get_device_name())'; }
