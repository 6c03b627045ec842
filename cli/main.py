def main():
    print("envreplica")
