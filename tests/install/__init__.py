"""The wheel, installed as the images install it."""
