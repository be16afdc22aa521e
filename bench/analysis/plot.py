#!/usr/bin/python3
"""The plots of bench/results are drawn by tools/plots/make_plots.py (one script for every PNG there); this name is
kept for bench/analysis/run_all.sh.   Usage: /usr/bin/python3 bench/analysis/plot.py [RESULTS_DIR]"""
import os
import subprocess
import sys

tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "plots", "make_plots.py")
args = ["--results", sys.argv[1]] if len(sys.argv) > 1 else []
sys.exit(subprocess.call([sys.executable, tool, *args]))
