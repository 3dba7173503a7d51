"""Write a slice of scikit-learn's 8x8 digits as CSV rows (64 pixels 0-16, then the label):

python make_data.py holdout.csv 1500:1797           # the holdout
python make_data.py train.csv 0:500                 # a first training set
python make_data.py train.csv 0:1500                # more data: a better model
python make_data.py train.csv 0:1500 --bad-labels   # labels shuffled: a worse one
"""

import argparse

import numpy as np
from sklearn.datasets import load_digits

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("out")
parser.add_argument("rows", help="START:END of the 1,797 rows")
parser.add_argument("--bad-labels", action="store_true", help="shuffle the labels")
args = parser.parse_args()
start, end = (int(n) for n in args.rows.split(":"))
digits = load_digits()
labels = digits.target[start:end].copy()
if args.bad_labels:
    np.random.default_rng(0).shuffle(labels)
rows = np.column_stack([digits.data[start:end], labels])
np.savetxt(args.out, rows, delimiter=",", fmt="%d")
