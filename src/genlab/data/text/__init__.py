"""Raw offline text shared by the minis: the Wikipedia excerpt and sentence splitting."""
