# A PyTorch script-mode job of several hosts: each all-reduces its rank with gloo (the rendezvous from the job's env).
import json
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(f"host {os.environ['SM_CURRENT_HOST']} rank {rank} of {dist.get_world_size()} sum={t.item()}", flush=True)
if rank == 0:
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "sum.json"), "w") as f:
        json.dump({"sum": t.item()}, f)
dist.destroy_process_group()
