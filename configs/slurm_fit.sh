#!/bin/bash
# ensml fit as a SLURM job that survives preemption (docs/guide/cluster.md, "Training on SLURM").
#
#   sbatch configs/slurm_fit.sh --config configs/mixed.yaml [--trainer.max_epochs 40 ...]
#
# Edit the #SBATCH lines for your cluster. One rank runs per task: srun starts them, and the
# trainer's devices and num_nodes are taken from the job below (tasks per node, nodes), so the
# job's shape is written once, here. Two minutes before the time limit SLURM sends SIGUSR1:
# ensml saves runs/<name>/checkpoints/preempted.ckpt at the next batch all ranks agree on and
# requeues the job, which resumes from it, bit for bit, when SLURM starts it again.
#
#SBATCH --job-name=ensml-fit
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=8
#SBATCH --time=24:00:00
#SBATCH --signal=USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=ensml-fit-%j.out
#
# On CPU nodes: drop --gpus-per-task and add --trainer.accelerator cpu to the command.
# The environment of sbatch is the job's (activate ensml's environment before sbatch), or
# activate it here: source /path/to/venv/bin/activate

export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"
# ENSML: the command that runs ensml (default: ensml on PATH).
srun ${ENSML:-ensml} fit "$@" \
  --trainer.devices="$SLURM_NTASKS_PER_NODE" --trainer.num_nodes="$SLURM_NNODES"
