"""Stage 14, planning: the planners (unified, LoRA, schedules, n+1), the correction rounds that re-solve while
simulation shows a miss, the driver that runs them, and explanations of infeasible or binding specs."""
