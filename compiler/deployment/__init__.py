"""Stage 8, what a deployment is before it is placed: a candidate shape (GPU, TP/PP, engine limits) with its
cost-model replica, its KV tiers and its MoE layout."""
